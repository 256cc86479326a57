<?xml version="1.0"?>
<!-- Emits each order's children in reverse order, orders last-to-first. -->
<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform" xmlns:m="http://services.samples/xsd">
  <xsl:template match="/">
    <orders>
      <xsl:for-each select="//m:buyStocks/order">
        <xsl:sort select="position()" data-type="number" order="descending"/>
        <order n="{position()}">
          <xsl:copy-of select="volume"/><xsl:copy-of select="price"/>
          <xsl:copy-of select="buyerID"/><xsl:copy-of select="symbol"/>
        </order>
      </xsl:for-each>
    </orders>
  </xsl:template>
</xsl:stylesheet>
