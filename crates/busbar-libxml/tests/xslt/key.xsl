<?xml version="1.0"?>
<!-- Groups orders by symbol with xsl:key (Muenchian grouping). -->
<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform">
  <xsl:output indent="yes"/>
  <xsl:key name="by-symbol" match="order" use="symbol"/>
  <xsl:template match="/">
    <groups>
      <xsl:for-each select="//order[generate-id() = generate-id(key('by-symbol', symbol)[1])]">
        <xsl:sort select="symbol"/>
        <group symbol="{symbol}" orders="{count(key('by-symbol', symbol))}"
               volume="{sum(key('by-symbol', symbol)/volume)}"/>
      </xsl:for-each>
    </groups>
  </xsl:template>
</xsl:stylesheet>
