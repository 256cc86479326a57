<?xml version="1.0"?>
<!-- Moves buyStocks into a new namespace with a new prefix, keeps the SOAP envelope,
     reports names and namespace URIs of what it met. -->
<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform"
    xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/"
    xmlns:m="http://services.samples/xsd"
    xmlns:t="urn:busbar:trade" exclude-result-prefixes="m">
  <xsl:output omit-xml-declaration="yes"/>
  <xsl:template match="soapenv:*">
    <xsl:copy><xsl:apply-templates select="@*|node()"/></xsl:copy>
  </xsl:template>
  <xsl:template match="soapenv:Header"/>
  <xsl:template match="m:buyStocks">
    <t:trades seen="{local-name()}" ns="{namespace-uri()}" parent="{name(..)}">
      <xsl:for-each select="order">
        <t:trade t:symbol="{symbol}"><xsl:value-of select="volume"/></t:trade>
      </xsl:for-each>
    </t:trades>
  </xsl:template>
  <xsl:template match="text()[normalize-space()='']"/>
</xsl:stylesheet>
